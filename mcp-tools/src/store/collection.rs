//! Keyed collections inside an entity, kept item by item: see [`Collection`].

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::{DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::sync::lock;

/// How many items a read hands a `reads` tool per collection, at most.
pub const PAGE_SIZE: usize = 50;

/// A keyed collection of items inside an entity, stored item by item.
///
/// A field of this type is not part of the entity's stored document: the document holds only
/// how many items there are and the next id to mint, and each item is stored on its own (a row
/// in SQL, an entry of the resource's item map in memory) with the version that last changed
/// it. A transition that touches `k` items reads and writes `k` items, whatever the collection
/// holds. Items get server-minted ids (1, 2, 3, ...), never reused.
///
/// Within a transition, [`push`](Self::push) appends without reading anything, and
/// [`get`](Self::get), [`get_mut`](Self::get_mut) and [`remove`](Self::remove) reach any item
/// by its id: an item the store has not handed the transition yet is fetched and the transition
/// run again with it (transitions are pure, so a second run is the same as the first). A
/// `reads` tool sees the first page of each collection (50 items), or the page its
/// `items_cursor` argument names, and [`next_cursor`](Self::next_cursor) for the next.
///
/// `#[derive(Entity)]` finds the fields whose type is named `Collection` (a type alias hides
/// one from it). With `#[tool(mutates = .., on_conflict = items)]` a change conflicts only with
/// changes of the items it reaches.
///
/// ```
/// use mcp_tools::store::{Collection, Entity};
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
/// #[entity(prefix = "pln")]
/// struct Plan {
///     title: String,
///     steps: Collection<String>,
/// }
///
/// let mut plan = Plan { title: "Move".into(), steps: Collection::new() };
/// let first = plan.steps.push("Pack".into());
/// assert_eq!((first, plan.steps.len()), (1, 1));
/// assert_eq!(plan.steps.get(first).map(String::as_str), Some("Pack"));
/// ```
pub struct Collection<T> {
    len: u64,
    next_id: u64,
    /// The items this call has in hand, by id: read from the store, or made by this call.
    in_hand: BTreeMap<u64, Slot<T>>,
    /// Where the items this call asks for and does not have are noted, when a store runs it.
    misses: Option<MissNote>,
    /// The cursor of the page after the one in hand (reads only).
    next_cursor: Option<String>,
}

/// Where a collection notes the ids it was asked for and does not have.
#[derive(Clone)]
struct MissNote {
    log: Arc<MissLog>,
    field: &'static str,
}

/// One item in hand.
#[derive(Clone)]
enum Slot<T> {
    /// As stored at `version`; `changed` once `get_mut` lent it out.
    Stored {
        version: u64,
        value: T,
        changed: bool,
    },
    /// Made by this call.
    Added { value: T },
    /// Not there: never made, or removed.
    Absent,
    /// Removed by this call; was stored at `version` (`None`: made by this call).
    Removed { version: Option<u64> },
}

impl<T> Collection<T> {
    /// An empty collection.
    pub fn new() -> Self {
        Collection {
            len: 0,
            next_id: 1,
            in_hand: BTreeMap::new(),
            misses: None,
            next_cursor: None,
        }
    }

    /// How many items the collection holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the collection holds no item.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `value` and returns its id. Reads nothing: an append costs the same at ten items
    /// and at ten thousand.
    pub fn push(&mut self, value: T) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.len += 1;
        self.in_hand.insert(id, Slot::Added { value });
        id
    }

    /// The item `id`, or `None` when there is no such item.
    pub fn get(&self, id: u64) -> Option<&T> {
        match self.in_hand.get(&id) {
            Some(Slot::Stored { value, .. } | Slot::Added { value }) => Some(value),
            Some(Slot::Absent | Slot::Removed { .. }) => None,
            None => {
                self.missed(id);
                None
            }
        }
    }

    /// The item `id` to change, or `None` when there is no such item.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        if !self.in_hand.contains_key(&id) {
            self.missed(id);
            return None;
        }
        match self.in_hand.get_mut(&id) {
            Some(Slot::Stored { value, changed, .. }) => {
                *changed = true;
                Some(value)
            }
            Some(Slot::Added { value }) => Some(value),
            _ => None,
        }
    }

    /// Removes the item `id` and returns it, or `None` when there is no such item.
    pub fn remove(&mut self, id: u64) -> Option<T> {
        let Some(slot) = self.in_hand.get_mut(&id) else {
            self.missed(id);
            return None;
        };
        let version = match slot {
            Slot::Stored { version, .. } => Some(*version),
            Slot::Added { .. } => None,
            Slot::Absent | Slot::Removed { .. } => return None,
        };
        let taken = std::mem::replace(slot, Slot::Removed { version });
        self.len -= 1;
        match taken {
            Slot::Stored { value, .. } | Slot::Added { value } => Some(value),
            _ => None,
        }
    }

    /// The items in hand, in id order: in a `reads` tool, the page the read returned; in a
    /// transition, the items it reached or made.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.in_hand.iter().filter_map(|(id, slot)| match slot {
            Slot::Stored { value, .. } | Slot::Added { value } => Some((*id, value)),
            _ => None,
        })
    }

    /// The version that last changed the item `id`, when it is in hand and stored.
    pub fn version_of(&self, id: u64) -> Option<u64> {
        match self.in_hand.get(&id) {
            Some(Slot::Stored { version, .. }) => Some(*version),
            _ => None,
        }
    }

    /// In a `reads` tool, the cursor of the next page, to pass back as `items_cursor`; `None`
    /// on the last page.
    pub fn next_cursor(&self) -> Option<&str> {
        self.next_cursor.as_deref()
    }

    fn missed(&self, id: u64) {
        if let Some(note) = &self.misses {
            lock(&note.log.wanted).push((note.field, id));
        }
    }
}

impl<T> Default for Collection<T> {
    fn default() -> Self {
        Collection::new()
    }
}

impl<T: Clone> Clone for Collection<T> {
    fn clone(&self) -> Self {
        Collection {
            len: self.len,
            next_id: self.next_id,
            in_hand: self.in_hand.clone(),
            misses: self.misses.clone(),
            next_cursor: self.next_cursor.clone(),
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for Collection<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Collection")
            .field("len", &self.len)
            .field("in_hand", &self.iter().collect::<Vec<_>>())
            .finish()
    }
}

/// Two collections are equal when they hold as many items, mint the same next id and have the
/// same items in hand.
impl<T: PartialEq> PartialEq for Collection<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.next_id == other.next_id && self.iter().eq(other.iter())
    }
}

/// One item as a store keeps it: its id, the version that last wrote it, and its value (`None`
/// for an item removed at that version).
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub struct StoredItem {
    pub id: u64,
    pub version: u64,
    pub value: Option<Value>,
}

/// A page of one collection's items, as a read returns it.
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub struct ItemsPage {
    pub field: &'static str,
    pub items: Vec<StoredItem>,
    /// Whether items follow the last one.
    pub more: bool,
}

/// An item a transition wrote: `value` is `None` when it removed it.
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub struct ItemWrite {
    pub field: &'static str,
    pub id: u64,
    pub value: Option<Value>,
}

/// The ids a transition asked for and was not handed, by collection.
#[derive(Default)]
#[doc(hidden)]
pub struct MissLog {
    wanted: Mutex<Vec<(&'static str, u64)>>,
}

impl MissLog {
    /// What was asked for since the last call, each once.
    pub(crate) fn take(&self) -> Vec<(&'static str, u64)> {
        let mut wanted = std::mem::take(&mut *lock(&self.wanted));
        wanted.sort_unstable();
        wanted.dedup();
        wanted
    }
}

/// The items a store handed a transition, by collection, and where it notes what else the
/// transition asked for.
pub(crate) struct InHand {
    items: BTreeMap<&'static str, Vec<StoredItem>>,
    /// `None` for a kind without collections: its changes allocate nothing for items.
    pub(crate) misses: Option<Arc<MissLog>>,
}

impl InHand {
    /// Nothing in hand yet, for a change of a resource whose kind has collections or not.
    pub(crate) fn new(collections: bool) -> Self {
        InHand {
            items: BTreeMap::new(),
            misses: collections.then(Arc::default),
        }
    }

    /// What the last run asked for and was not handed.
    pub(crate) fn take_misses(&self) -> Vec<(&'static str, u64)> {
        self.misses
            .as_deref()
            .map(MissLog::take)
            .unwrap_or_default()
    }

    /// The items of `field` in hand.
    pub(crate) fn items(&self, field: &str) -> &[StoredItem] {
        self.items.get(field).map_or(&[], Vec::as_slice)
    }

    /// Adds what a store found of `wanted`: an id it did not find is in hand as absent.
    pub(crate) fn add(
        &mut self,
        wanted: &[(&'static str, u64)],
        found: Vec<(&'static str, StoredItem)>,
    ) {
        for (field, item) in found {
            self.items.entry(field).or_default().push(item);
        }
        for (field, id) in wanted {
            let items = self.items.entry(field).or_default();
            if !items.iter().any(|item| item.id == *id) {
                items.push(StoredItem {
                    id: *id,
                    version: 0,
                    value: None,
                });
            }
        }
    }

    /// Every item in hand, with its collection.
    pub(crate) fn all(&self) -> impl Iterator<Item = (&'static str, &StoredItem)> {
        self.items
            .iter()
            .flat_map(|(field, items)| items.iter().map(move |item| (*field, item)))
    }
}

/// What a store does with a collection field, whatever its item type. Not API: the
/// `#[derive(Entity)]` of an entity with collections implements [`Entity::collection`] with it.
///
/// [`Entity::collection`]: super::Entity::collection
#[doc(hidden)]
pub trait Items: Send {
    /// Puts `items` in hand (`value: None`: absent), and
    /// says where to note what is asked for and missing.
    fn hand(
        &mut self,
        items: &[StoredItem],
        misses: Option<(&Arc<MissLog>, &'static str)>,
    ) -> Result<(), String>;
    /// The items this call made, changed or removed, and nothing in hand any more.
    fn take_writes(&mut self, field: &'static str) -> Result<Vec<ItemWrite>, String>;
    /// Sets the cursor of the next page (reads).
    fn set_next_cursor(&mut self, cursor: Option<String>);
}

impl<T: Serialize + DeserializeOwned + Send> Items for Collection<T> {
    fn hand(
        &mut self,
        items: &[StoredItem],
        misses: Option<(&Arc<MissLog>, &'static str)>,
    ) -> Result<(), String> {
        for item in items {
            let slot = match &item.value {
                Some(value) => Slot::Stored {
                    version: item.version,
                    value: T::deserialize(value)
                        .map_err(|error| format!("item {} is unreadable: {error}", item.id))?,
                    changed: false,
                },
                None => Slot::Absent,
            };
            self.in_hand.insert(item.id, slot);
        }
        if let Some((log, field)) = misses {
            self.misses = Some(MissNote {
                log: Arc::clone(log),
                field,
            });
        }
        Ok(())
    }

    fn take_writes(&mut self, field: &'static str) -> Result<Vec<ItemWrite>, String> {
        let mut writes = Vec::new();
        for (id, slot) in std::mem::take(&mut self.in_hand) {
            let value = match slot {
                Slot::Stored { changed: false, .. } | Slot::Absent => continue,
                Slot::Removed { version: None } => continue,
                Slot::Stored { value, .. } | Slot::Added { value } => Some(
                    serde_json::to_value(&value)
                        .map_err(|error| format!("item {id} cannot be encoded: {error}"))?,
                ),
                Slot::Removed { version: Some(_) } => None,
            };
            writes.push(ItemWrite { field, id, value });
        }
        self.misses = None;
        self.next_cursor = None;
        Ok(writes)
    }

    fn set_next_cursor(&mut self, cursor: Option<String>) {
        self.next_cursor = cursor;
    }
}

/// The stored document holds `{"len": .., "next_id": ..}`; a collection with items in hand (a
/// read's page, a transition's outcome) also shows them as `items` (`[{"id", "version", "value"}]`,
/// `version` absent for an item this call made) and `next_cursor`. The store takes the items
/// out before it stores the document, for the fields `#[derive(Entity)]` found: name the field's
/// type `Collection<..>` (a type alias hides it from the derive).
impl<T: Serialize> Serialize for Collection<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let shown: Vec<ShownItem<'_, T>> = self
            .in_hand
            .iter()
            .filter_map(|(id, slot)| match slot {
                Slot::Stored { version, value, .. } => Some(ShownItem {
                    id: *id,
                    version: Some(*version),
                    value,
                }),
                Slot::Added { value } => Some(ShownItem {
                    id: *id,
                    version: None,
                    value,
                }),
                _ => None,
            })
            .collect();
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("len", &self.len)?;
        map.serialize_entry("next_id", &self.next_id)?;
        if !shown.is_empty() {
            map.serialize_entry("items", &shown)?;
        }
        if let Some(cursor) = &self.next_cursor {
            map.serialize_entry("next_cursor", cursor)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct ShownItem<'a, T> {
    id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<u64>,
    value: &'a T,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Collection<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Stored(PhantomData))
    }
}

/// Reads a stored collection: `len` and `next_id` (anything shown beside them is not state),
/// or a plain list, the state of an entity whose field was a `Vec` before. A list's items are
/// in hand as made by this call, with ids 1, 2, ...: the next change stores them one by one, so
/// an entity moved from a `Vec` to a `Collection` migrates on its first change.
struct Stored<T>(PhantomData<fn() -> T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for Stored<T> {
    type Value = Collection<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a collection (`{\"len\": n, \"next_id\": n}`) or a list of its items")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut len, mut next_id) = (None, None);
        let mut unstored = Vec::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match &*key {
                "len" => len = Some(map.next_value::<u64>()?),
                "next_id" => next_id = Some(map.next_value::<u64>()?),
                // Items shown without a version were made with the entity and never stored
                // one by one (a `creates` function pushed them): they are in hand, and the
                // entity's next change stores them. Items with a version are rows already.
                "items" => {
                    let items = map.next_value::<Vec<ShownIn<T>>>()?;
                    unstored.extend(items.into_iter().filter(|item| item.version.is_none()));
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        let len = len.ok_or_else(|| serde::de::Error::missing_field("len"))?;
        let next_id = next_id.ok_or_else(|| serde::de::Error::missing_field("next_id"))?;
        if next_id == 0 || len >= next_id {
            return Err(serde::de::Error::custom(format!(
                "a collection of {len} items cannot mint id {next_id} next"
            )));
        }
        let mut collection = Collection::new();
        collection.len = len;
        collection.next_id = next_id;
        for item in unstored {
            if item.id == 0 || item.id >= next_id {
                return Err(serde::de::Error::custom(format!(
                    "a collection that mints id {next_id} next holds no item {}",
                    item.id
                )));
            }
            collection
                .in_hand
                .insert(item.id, Slot::Added { value: item.value });
        }
        Ok(collection)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut collection = Collection::new();
        while let Some(value) = seq.next_element::<T>()? {
            collection.push(value);
        }
        Ok(collection)
    }
}

/// An item as a collection shows it: an item without a version was never stored on its own.
#[derive(Deserialize)]
struct ShownIn<T> {
    id: u64,
    #[serde(default)]
    version: Option<u64>,
    value: T,
}

/// The schema of a collection as outcomes and reads show it.
#[derive(JsonSchema)]
#[schemars(rename = "Collection_of_{T}")]
#[allow(dead_code)]
struct CollectionShape<T> {
    /// How many items the collection holds.
    len: u64,
    /// The id the next item will get.
    next_id: u64,
    /// The items in hand: a read's page, or the items a change made or touched.
    #[serde(default)]
    items: Vec<ItemShape<T>>,
    /// Pass it as `items_cursor` to read the next page; absent on the last page.
    #[serde(default)]
    next_cursor: Option<String>,
}

/// An item as shown.
#[derive(JsonSchema)]
#[schemars(rename = "Item_of_{T}")]
#[allow(dead_code)]
struct ItemShape<T> {
    /// The item's id in its collection.
    id: u64,
    /// The version of the entity that last changed the item (absent for one this call made).
    #[serde(default)]
    version: Option<u64>,
    /// The item.
    value: T,
}

impl<T: JsonSchema> JsonSchema for Collection<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        CollectionShape::<T>::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        CollectionShape::<T>::schema_id()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        CollectionShape::<T>::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stored(id: u64, version: u64, value: &str) -> StoredItem {
        StoredItem {
            id,
            version,
            value: Some(json!(value)),
        }
    }

    #[test]
    fn a_stored_collection_is_its_counts_only() {
        let mut notes: Collection<String> = Collection::new();
        notes.push("a".into());
        notes.push("b".into());
        let writes = notes.take_writes("notes").unwrap();
        assert_eq!(writes.len(), 2);
        assert_eq!(
            serde_json::to_value(&notes).unwrap(),
            json!({ "len": 2, "next_id": 3 })
        );
        let back: Collection<String> =
            serde_json::from_value(json!({ "len": 2, "next_id": 3, "items": [] })).unwrap();
        assert_eq!(back, notes);
    }

    #[test]
    fn a_plain_list_is_in_hand_to_be_stored_by_the_next_change() {
        let mut notes: Collection<String> = serde_json::from_value(json!(["a", "b"])).unwrap();
        assert_eq!(
            (notes.len(), notes.get(2).map(String::as_str)),
            (2, Some("b"))
        );
        assert_eq!(notes.push("c".into()), 3);
        let writes = notes.take_writes("notes").unwrap();
        assert_eq!(
            writes.iter().map(|write| write.id).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(
            serde_json::to_value(&notes).unwrap(),
            json!({ "len": 3, "next_id": 4 })
        );
    }

    #[test]
    fn impossible_counts_are_refused() {
        for bad in [
            json!({ "len": 3, "next_id": 3 }),
            json!({ "len": 0, "next_id": 0 }),
            json!({ "len": 0 }),
            json!(["not a number"]),
            json!("text"),
        ] {
            assert!(
                serde_json::from_value::<Collection<u32>>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_what_changed_is_written() {
        let mut notes: Collection<String> =
            serde_json::from_value(json!({ "len": 3, "next_id": 4 })).unwrap();
        let log = Arc::new(MissLog::default());
        notes
            .hand(
                &[
                    stored(1, 2, "one"),
                    stored(2, 3, "two"),
                    stored(3, 4, "three"),
                ],
                Some((&log, "notes")),
            )
            .unwrap();
        assert_eq!(notes.get(1).map(String::as_str), Some("one"));
        notes.get_mut(2).unwrap().push('!');
        assert_eq!(notes.remove(3).as_deref(), Some("three"));
        assert_eq!(notes.remove(3), None);
        let added = notes.push("four".into());
        let gone = notes.push("five".into());
        notes.remove(gone);
        assert_eq!((added, notes.len()), (4, 3));
        assert!(log.take().is_empty());
        let writes = notes.take_writes("notes").unwrap();
        assert_eq!(
            writes,
            vec![
                ItemWrite {
                    field: "notes",
                    id: 2,
                    value: Some(json!("two!"))
                },
                ItemWrite {
                    field: "notes",
                    id: 3,
                    value: None
                },
                ItemWrite {
                    field: "notes",
                    id: 4,
                    value: Some(json!("four"))
                },
            ]
        );
        assert_eq!(notes.iter().count(), 0);
    }

    #[test]
    fn what_is_not_in_hand_is_noted_once() {
        let mut notes: Collection<String> =
            serde_json::from_value(json!({ "len": 9, "next_id": 10 })).unwrap();
        let log = Arc::new(MissLog::default());
        notes
            .hand(
                &[StoredItem {
                    id: 5,
                    version: 7,
                    value: None,
                }],
                Some((&log, "notes")),
            )
            .unwrap();
        assert_eq!(notes.get(5), None);
        assert_eq!(notes.get(2), None);
        assert_eq!(notes.get_mut(2), None);
        assert_eq!(notes.remove(8), None);
        assert_eq!(log.take(), vec![("notes", 2), ("notes", 8)]);
        assert_eq!(notes.len(), 9);
    }

    #[test]
    fn a_page_shows_its_items_and_cursor() {
        let mut notes: Collection<String> =
            serde_json::from_value(json!({ "len": 2, "next_id": 3 })).unwrap();
        notes
            .hand(&[stored(1, 1, "a"), stored(2, 5, "b")], None)
            .unwrap();
        notes.set_next_cursor(Some("c2".into()));
        assert_eq!(
            serde_json::to_value(&notes).unwrap(),
            json!({ "len": 2, "next_id": 3, "next_cursor": "c2", "items": [
                { "id": 1, "version": 1, "value": "a" },
                { "id": 2, "version": 5, "value": "b" },
            ] })
        );
        assert_eq!(notes.version_of(2), Some(5));
        assert_eq!(notes.next_cursor(), Some("c2"));
    }

    #[test]
    fn an_unreadable_item_is_an_error() {
        let mut counts: Collection<u32> = Collection::new();
        let error = counts.hand(&[stored(1, 1, "x")], None).unwrap_err();
        assert!(error.contains("item 1"), "{error}");
    }

    #[test]
    fn what_is_in_hand_is_seen_in_id_order_and_changed_where_it_was_made() {
        let mut notes: Collection<String> = Collection::new();
        assert!(notes.is_empty());
        let log = Arc::new(MissLog::default());
        notes
            .hand(
                &[
                    stored(2, 4, "two"),
                    StoredItem {
                        id: 3,
                        version: 5,
                        value: None,
                    },
                ],
                Some((&log, "notes")),
            )
            .unwrap();
        let made = notes.push("made".into());
        assert!(!notes.is_empty());
        notes.get_mut(made).unwrap().push('!');
        assert_eq!(made, 1);
        assert_eq!(
            notes.iter().collect::<Vec<_>>(),
            [(made, &"made!".to_owned()), (2, &"two".to_owned())]
        );
        // A read shows what it has in hand; an item this call made has no version yet.
        assert_eq!(
            serde_json::to_value(&notes).unwrap(),
            json!({ "len": 1, "next_id": 2, "items": [
                { "id": 1, "value": "made!" },
                { "id": 2, "version": 4, "value": "two" },
            ] })
        );
        let copy = notes.clone();
        assert_eq!(copy, notes);
        assert!(format!("{copy:?}").contains("made!"), "{copy:?}");
        let writes = notes.take_writes("notes").unwrap();
        assert_eq!(
            writes,
            [ItemWrite {
                field: "notes",
                id: made,
                value: Some(json!("made!"))
            }]
        );
    }

    #[test]
    fn collections_differ_by_count_next_id_or_items_in_hand() {
        let base: Collection<String> =
            serde_json::from_value(json!({ "len": 2, "next_id": 5 })).unwrap();
        let other_len: Collection<String> =
            serde_json::from_value(json!({ "len": 3, "next_id": 5 })).unwrap();
        let other_next: Collection<String> =
            serde_json::from_value(json!({ "len": 2, "next_id": 6 })).unwrap();
        let mut other_items = base.clone();
        other_items.hand(&[stored(1, 1, "a")], None).unwrap();
        assert_eq!(base, base.clone());
        assert_ne!(base, other_len);
        assert_ne!(base, other_next);
        assert_ne!(base, other_items);
    }

    #[test]
    fn a_wrong_shape_says_what_a_collection_is_and_the_schema_shows_one() {
        let error = serde_json::from_value::<Collection<u32>>(json!("text")).unwrap_err();
        assert!(error.to_string().contains("a collection"), "{error}");
        let schema = serde_json::to_value(schemars::schema_for!(Collection<String>)).unwrap();
        let properties = &schema["properties"];
        for member in ["len", "next_id", "items", "next_cursor"] {
            assert!(properties.get(member).is_some(), "{member}: {schema}");
        }
    }
}
